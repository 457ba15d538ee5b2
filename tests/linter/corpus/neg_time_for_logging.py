# expect: none
import logging
import time
from openai import OpenAI

log = logging.getLogger(__name__)

def ask(client: OpenAI, q):
    started = time.time()
    out = client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."}, {"role": "user", "content": q}])
    log.info("took %.2fs", time.time() - started)
    return out
