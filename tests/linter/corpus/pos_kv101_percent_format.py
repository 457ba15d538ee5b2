# expect: KV101
import uuid
import openai

def complete(question):
    prompt = "Request %s\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates.\nQ: %s" % (uuid.uuid4(), question)
    return openai.Completion.create(model="gpt-3.5-turbo-instruct", prompt=prompt)
