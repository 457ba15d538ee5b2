# expect: KV102
from datetime import datetime
from openai import OpenAI

FEW_SHOT = [
    {"role": "user", "content": "Where is my parcel? I ordered it last week and nothing came."},
    {"role": "assistant", "content": "Could you give me the order number so I can check for you?"},
    {"role": "user", "content": "It is 4411-778. The tracking page has said 'label created' for six days now."},
    {"role": "assistant", "content": "Thank you. The carrier has not scanned it yet, which usually means the "
     "warehouse missed the pickup. I have asked them to hand it over today; see policy section 7.2."},
]

def ask(client: OpenAI, q):
    system = "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket." + f"\nNow: {datetime.now()}"
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": system}, *FEW_SHOT, {"role": "user", "content": q}])
