# The hpcopt server (REST + gRPC + dashboard). No torch, no MPI: agents run on the cluster.
FROM python:3.11-slim
WORKDIR /app
COPY requirements/constraints.txt requirements/constraints.txt
COPY client client
COPY server server
RUN pip install --no-cache-dir -c requirements/constraints.txt ./client "./server[postgres]"
EXPOSE 8000 50051
# Binding beyond loopback needs auth: set HPCOPT_ADMIN_TOKEN (or create tokens first).
CMD ["hpcopt-server", "serve", "--host", "0.0.0.0"]
