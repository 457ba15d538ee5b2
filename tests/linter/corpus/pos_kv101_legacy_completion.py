# expect: KV101
import openai
from datetime import datetime

def complete(q):
    return openai.Completion.create(model="davinci",
        prompt=f"{datetime.now():%H:%M} You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates.\n\nQ: {q}\nA:")
