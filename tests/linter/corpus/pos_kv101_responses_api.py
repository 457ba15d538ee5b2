# expect: KV101
from openai import OpenAI
import secrets

client = OpenAI()

def respond(q):
    token = secrets.token_hex(8)
    return client.responses.create(model="gpt-4.1", instructions=f"[{token}] You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates.", input=q)
