# expect: KV101
from langchain_core.prompts import ChatPromptTemplate

prompt = ChatPromptTemplate.from_messages([
    ("system", "You are assisting {user_name} (account {account_id}). You are a careful financial "
               "assistant: explain fees plainly, never give investment advice, and always mention "
               "that rates can change. When a question involves taxes, pensions or loans, explain the general "
               "rules, point to the official calculator, and suggest speaking with a licensed adviser. "
               "Quote fees with their currency and the date of the price list they come from."),
    ("human", "{question}"),
])


def run(chain_llm, user, question):
    chain = prompt | chain_llm
    return chain.invoke({"user_name": user.name, "account_id": user.account_id, "question": question})
