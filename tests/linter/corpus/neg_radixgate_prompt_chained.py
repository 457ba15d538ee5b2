# expect: none
from datetime import datetime
from radixgate import Client, Prompt

SYSTEM = "You are a meticulous support assistant for Acme. Answer in three sentences and cite."

def ask(client: Client, user_id, question, docs):
    prompt = (Prompt(template="rag")
              .turn(f"now={datetime.now()} user={user_id}")
              .shared("\n\n".join(docs))
              .static(SYSTEM)
              .turn(question))
    return client.chat(prompt)
