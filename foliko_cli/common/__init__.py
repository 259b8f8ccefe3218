"""What every layer shares: settings, the clock and ids, shown URLs, the key store, extras."""
