# expect: none
from openai import OpenAI

def rag(client: OpenAI, question, document):
    prompt = f"Question: {question}\n\nDocument:\n{document}\n\nAnswer:"
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
