# expect: KV201
import json
from pydantic import BaseModel
from openai import OpenAI

class Answer(BaseModel):
    text: str

def ask(client: OpenAI, q):
    schema = json.dumps(Answer.model_json_schema(), indent=2)
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": f"Reply with JSON matching:\n{schema}\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."},
        {"role": "user", "content": q}])
