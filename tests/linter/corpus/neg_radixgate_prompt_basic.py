# expect: none
from datetime import datetime
import radixgate

def ask(client: radixgate.Client, user_id, question):
    prompt = radixgate.Prompt(template="support")
    prompt.turn(f"Time: {datetime.now()}, user {user_id}")
    prompt.static("You are a meticulous support assistant for Acme. Answer in three sentences.")
    prompt.turn(question)
    return client.chat(prompt)
