# expect: KV101
from datetime import datetime

def summarize(llm, text):
    return llm.invoke(f"Time {datetime.now()}. You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates.\n\n{text}")
