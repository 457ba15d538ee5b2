# expect: KV101
import requests
from datetime import datetime

URL = "http://localhost:8000/v1/chat/completions"

def ask(question):
    body = {"model": "m", "messages": [
        {"role": "system", "content": "Now: " + datetime.now().isoformat() + " You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."},
        {"role": "user", "content": question}]}
    return requests.post(URL, json=body, timeout=30).json()
