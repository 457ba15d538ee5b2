# expect: KV203
import random
from openai import OpenAI

EXAMPLES = ["great product -> positive", "broke in a day -> negative", "fine -> neutral"]

def classify(client: OpenAI, text):
    shots = list(EXAMPLES)
    random.shuffle(shots)
    prompt = "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.\n" + "\n".join(shots) + f"\n{text} ->"
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
