# expect: none
import random
from openai import OpenAI

EXAMPLES = ["a -> b", "c -> d", "e -> f"]
rng = random.Random(1234)

def ask(client: OpenAI, q):
    shots = list(EXAMPLES)
    local = random.Random(7)
    local.shuffle(shots)
    prompt = "\n".join(shots) + "\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.\n" + q
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
