"""The event engine: simpy processes per pipeline stage, transfers as max-min fair flows (``EventEngine``)."""
