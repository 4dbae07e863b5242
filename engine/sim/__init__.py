"""The event-driven engine: simpy processes per pipeline stage, flows sharing links max-min fairly."""
