"""What the tests share that is not a fixture: the machine's limits (``env``), the
tests' own clients (``clients``, ``web``), live servers and server processes (``live``,
``process``), specs, seeded campaigns, the agent's and the dashboard's drivers, and the
hostile clients (``swarm``, ``hostile``). Fixtures stay in the ``conftest.py`` files and
import from here; tests import from here, never from a conftest."""
