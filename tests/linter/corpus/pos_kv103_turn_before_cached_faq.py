# expect: KV103
import functools

from openai import OpenAI


@functools.cache
def faq() -> str:
    with open("faq.txt") as handle:
        return handle.read()


def reply(client: OpenAI, user_message: str):
    return client.chat.completions.create(model="m", messages=[
        {"role": "user", "content": user_message},
        {"role": "user", "content": "Frequently asked questions:\n" + faq()}])
