# expect: KV101
import datetime as dt
from openai import OpenAI

client = OpenAI()
GUIDELINES = """Follow the company tone guide: be warm, concise and precise. Never share internal
ticket numbers. If the user asks for a refund, collect the order id and the reason first. Close every reply
by asking whether anything else is needed, and never promise delivery dates or compensation that the
order system has not confirmed. Write
prices with their currency and keep replies under one hundred and twenty words."""


def respond(customer_name: str, message: str) -> str:
    greeting = f"Good {'morning' if dt.datetime.now().hour < 12 else 'afternoon'}, {customer_name}!"
    completion = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": greeting + "\n" + GUIDELINES},
                  {"role": "user", "content": message}],
    )
    return completion.choices[0].message.content
