# expect: KV101
from openai import OpenAI
import secrets

client = OpenAI()

def respond(q):
    token = secrets.token_hex(8)
    return client.responses.create(model="gpt-4.1", instructions=f"[{token}] You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.", input=q)
