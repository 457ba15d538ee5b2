# expect: none
import os
from openai import OpenAI

def ask(client: OpenAI, folder, question):
    docs = [open(os.path.join(folder, f)).read() for f in sorted(os.listdir(folder))]
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "Answer from these files:\n" + "\n\n".join(docs)},
        {"role": "user", "content": question}])
