# expect: KV101
from datetime import date
from langchain_core.prompts import ChatPromptTemplate

def build():
    return ChatPromptTemplate.from_messages([
        ("system", "Today's date: {current_date}. You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."),
        ("human", "{input}"),
    ])

def run(llm, text):
    chain = build() | llm
    return chain.invoke({"current_date": date.today().isoformat(), "input": text})
