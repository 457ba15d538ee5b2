# expect: KV101
from datetime import datetime
from openai import OpenAI

TEMPLATE = "Date: {now}\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.\nQuestion: {question}"

def run(client: OpenAI, question: str):
    text = TEMPLATE.format(now=datetime.utcnow().isoformat(), question=question)
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
