"""What every layer shares: settings, the clock and ids, how URLs are shown, the key
store, how to install an extra."""
