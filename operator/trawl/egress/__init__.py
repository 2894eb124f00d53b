"""The address guard of every outbound connection Trawl makes: which peers the fetcher, the browser's
proxy, the sinks and the operator's webhooks may connect to, checked where the connection is made."""
