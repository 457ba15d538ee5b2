# expect: none
import anthropic

client = anthropic.Anthropic()

def ask(user_name, q):
    return client.messages.create(model="claude", max_tokens=256, system="You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.",
        messages=[{"role": "user", "content": f"I am {user_name}. {q}"}])
