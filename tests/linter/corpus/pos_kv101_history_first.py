# expect: KV101
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

prompt = ChatPromptTemplate.from_messages([
    MessagesPlaceholder(variable_name="chat_history"),
    ("system", "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."),
    ("human", "{input}"),
])
