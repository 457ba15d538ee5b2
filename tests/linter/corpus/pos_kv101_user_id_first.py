# expect: KV101
import openai

def answer(user_id: str, question: str):
    return openai.ChatCompletion.create(model="gpt-4", messages=[
        {"role": "system", "content": f"User {user_id}. You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."},
        {"role": "user", "content": question},
    ])
