"""sickbay's processing: extract → correlate → decide, as pure engines plus Faust agents."""
