# expect: KV101
from datetime import datetime
from openai import OpenAI

client = OpenAI()

def reply(question):
    system = f"Current time: {datetime.now()}. You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."
    return client.chat.completions.create(model="gpt-4o", messages=[
        {"role": "system", "content": system}, {"role": "user", "content": question}])
