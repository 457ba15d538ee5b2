# expect: KV101
import uuid
import openai

def complete(question):
    prompt = "Request %s\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.\nQ: %s" % (uuid.uuid4(), question)
    return openai.Completion.create(model="gpt-3.5-turbo-instruct", prompt=prompt)
