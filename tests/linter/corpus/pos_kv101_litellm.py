# expect: KV101
import random
import litellm

def chat(q):
    nonce = random.randint(0, 10**6)
    return litellm.completion(model="gpt-4o", messages=[
        {"role": "system", "content": f"nonce={nonce} You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."},
        {"role": "user", "content": q}])
