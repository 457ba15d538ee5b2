# expect: none
import anthropic

client = anthropic.Anthropic()

def ask(user_name, q):
    return client.messages.create(model="claude", max_tokens=256, system="You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates.",
        messages=[{"role": "user", "content": f"I am {user_name}. {q}"}])
