# expect: none
import random
from openai import OpenAI

random.seed(0)
EXAMPLES = ["a -> b", "c -> d"]

def ask(client: OpenAI, q):
    shots = list(EXAMPLES)
    random.shuffle(shots)
    return client.chat.completions.create(model="m", messages=[
        {"role": "user", "content": "\n".join(shots) + "\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates.\n" + q}])
