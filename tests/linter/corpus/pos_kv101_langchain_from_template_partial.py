# expect: KV101
from datetime import datetime
from langchain_core.prompts import PromptTemplate

prompt = PromptTemplate.from_template("Today is {today}. You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.\n\nQuestion: {question}")
prompt = prompt.partial(today=lambda: str(datetime.now()))

def answer(llm, question):
    return (prompt | llm).invoke({"question": question})
