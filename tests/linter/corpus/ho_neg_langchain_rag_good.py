# expect: none
from langchain_core.prompts import PromptTemplate

QA_TEMPLATE = """Use the following pieces of context to answer the question at the end.
If you don't know the answer, just say that you don't know, don't try to make up an answer.

{context}

Question: {question}
Helpful Answer:"""
QA_PROMPT = PromptTemplate(template=QA_TEMPLATE, input_variables=["context", "question"])
