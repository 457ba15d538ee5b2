# expect: KV101
from datetime import datetime
from langchain_core.prompts import PromptTemplate

prompt = PromptTemplate.from_template("Today is {today}. You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates.\n\nQuestion: {question}")
prompt = prompt.partial(today=lambda: str(datetime.now()))

def answer(llm, question):
    return (prompt | llm).invoke({"question": question})
