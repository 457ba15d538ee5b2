# expect: KV101
import uuid
from langchain.prompts import PromptTemplate

TEMPLATE = PromptTemplate(
    input_variables=["trace", "question"],
    template="Trace {trace}\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.\nQuestion: {question}",
)

def ask(llm, question):
    text = TEMPLATE.format(trace=uuid.uuid4().hex, question=question)
    return llm.invoke(text)
