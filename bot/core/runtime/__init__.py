"""The engine and the workers it composes: per group a dispatcher (routing and runs) and an
outbox (showing committed rows), the lease keeper, the schedule ticker, agent runs and direct
runs, each agent's lock. Each part gets a dataclass of what it uses; only the engine knows them all."""
