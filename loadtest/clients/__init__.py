"""Producer clients: each times its calls and reports them through Locust's request event."""
