# expect: KV101
from langchain_core.prompts import ChatPromptTemplate, SystemMessagePromptTemplate, HumanMessagePromptTemplate

system = SystemMessagePromptTemplate.from_template("Customer {user_name}. You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.")
chat = ChatPromptTemplate.from_messages([system, HumanMessagePromptTemplate.from_template("{question}")])
