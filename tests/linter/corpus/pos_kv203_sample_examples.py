# expect: KV203
import random
from openai import OpenAI

POOL = [{"role": "user", "content": "2+2"}, {"role": "assistant", "content": "4"}]

def ask(client: OpenAI, q):
    shots = random.sample(POOL, k=2)
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "You are a calculator."}, *shots,
        {"role": "user", "content": q}])
