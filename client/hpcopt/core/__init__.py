"""The shared core: what the client, the server and the agent all import.

- ``names``: the algorithm, pruner and scheme names a spec may use.
- ``spec``, ``documents``, ``specfile``, ``taskref``, ``taskfile``, ``training``,
  ``options``: the campaign spec, its checks and the option tables.
- ``schemes``: the training schemes' knobs and traits.
- ``planner``: the layout planner and its one ``Layout``.
- ``records``: the typed records every transport and the CLI read.
- ``checkpoints``: checkpoint URIs and paths.
- ``serverfile``: the connection file a server writes and clients read.

It imports nothing from the transports, the CLI, the server or the agent
(``tests/test_layers.py``)."""
