# expect: KV103
from openai import OpenAI

def ask(client: OpenAI, user_question):
    manual = open("manual.txt").read()
    return client.chat.completions.create(model="m", messages=[
        {"role": "user", "content": user_question},
        {"role": "user", "content": manual}])
