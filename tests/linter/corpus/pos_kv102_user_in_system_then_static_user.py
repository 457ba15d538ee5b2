# expect: KV102
from openai import OpenAI

def ask(client: OpenAI, customer_id, q):
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket. Customer: " + customer_id},
        {"role": "user", "content": "Here is our returns policy: items may be returned within thirty days of delivery if unused, in their original packaging, with the receipt or order number. Refunds go to the original payment method within five working days of the item reaching our warehouse; shipping costs are refunded only for faulty items, and gift cards or personalised items cannot be returned at all."},
        {"role": "user", "content": q}])
