# expect: none
from openai import OpenAI

def rag(client: OpenAI, question, document):
    prompt = f"Document:\n{document}\n\nQuestion: {question}\nAnswer:"
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
