"""The pure core: it knows nothing of Discord, OpenAI or the database (tests/test_layering.py).

Layers, each importing only its own and the ones above it (tests/core/test_import_graph.py):

  settings         every group setting, declared once (GroupSettings)
  models, errors   value objects and the error tree
  rules/           pure rules over values (no I/O)
  ports            what the core asks of the store (one role per concept), the model, the surface
  features/        logic over the ports: context window, selector, summaries, tasks, memory ...
  runtime/         the engine and its workers;   record/  exports and replays
  verbs/           the commands the surfaces offer, acting on an engine
"""
