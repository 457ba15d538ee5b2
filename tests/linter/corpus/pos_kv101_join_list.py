# expect: KV101
from datetime import datetime
from openai import OpenAI

def ask(client: OpenAI, user_email, question):
    parts = [f"Email: {user_email}", "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.", "Be concise and friendly at all times, always."]
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "\n".join(parts)}, {"role": "user", "content": question}])
