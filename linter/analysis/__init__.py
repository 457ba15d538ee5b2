"""promptlint's analysis core: what a prompt is made of, read from the source without running it.

Each module imports only those above it in this list (`tests/test_import_graph.py` holds it so):
`shape` (the string-shape model), `names` (what names and calls say about a value), `scope` (module
facts and function scopes), `bodies` (functions' bodies dropped until read, in a large group),
`placeholders`, `expressions` and `calls` (the evaluator: an expression to a shape), `builders`,
`site` (a prompt as ordered segments), `sinks` (the calls that send one),
`walker` (a function read statement by statement), `facts` (a file parsed, its module's facts),
`reader` (one module read), `ordering` (which rule a site breaks), `project` (the files linted
together). The evaluator reads a module function's returns with the walker's `read_function`,
handed to it, so that neither imports the other's module back.
"""
