//! Ethernet, 802.1Q/802.1ad VLAN, ARP, IPv4, IPv6, TCP, UDP, ICMP/ICMPv6 views (used by `flow` and the drivers).
