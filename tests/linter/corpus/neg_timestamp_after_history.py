# expect: none
from datetime import datetime
from openai import OpenAI

def ask(client: OpenAI, history, q):
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."}, *history,
        {"role": "user", "content": f"{q}\n(sent at {datetime.now():%H:%M})"}])
