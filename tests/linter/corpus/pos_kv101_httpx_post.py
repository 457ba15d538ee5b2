# expect: KV101
import httpx
import time

def ask(client: httpx.Client, user_id, question):
    return client.post("/v1/chat/completions", json={"model": "m", "messages": [
        {"role": "user", "content": f"[{user_id}] You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket. {question}"}]})
