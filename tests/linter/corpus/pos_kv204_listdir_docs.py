# expect: KV204
import os
from openai import OpenAI

def ask(client: OpenAI, folder, question):
    docs = [open(os.path.join(folder, f)).read() for f in os.listdir(folder)]
    context = "\n\n".join(docs)
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "Answer from these files:\n" + context},
        {"role": "user", "content": question}])
