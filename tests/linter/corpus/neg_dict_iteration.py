# expect: none
from openai import OpenAI

TOOLS = {"search": "Search the web.", "weather": "Get the weather."}

def ask(client: OpenAI, q):
    listing = "\n".join(f"{k}: {v}" for k, v in TOOLS.items())
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": listing + "\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."}, {"role": "user", "content": q}])
