"""A learning switch for os-ken (OpenFlow 1.3), written for dpustack's controller test
after the behaviour of upstream's simple_switch_13 example (which os-ken's PyPI package
no longer ships):

* on connect: a table-miss rule (priority 0, everything to the controller, whole packet)
  and a PORT_DESC request (to know the ports to flood to);
* on every packet-in: learn eth_src -> in_port for that datapath; if eth_dst is known,
  install `priority=1,in_port=IN,eth_src=S,eth_dst=D actions=output:OUT` and send the
  packet there, else send it to every other port (explicit outputs, not OFPP_FLOOD).

Every packet-in is appended as one line to the file named by the environment variable
DPUSTACK_OSKEN_LOG (when set), so a test can tell when packet-ins stop.
"""

import os
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib.packet import ethernet, packet
from os_ken.ofproto import ofproto_v1_3


class LearningSwitch(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.macs = {}  # dpid -> {mac: port}
        self.ports = {}  # dpid -> set of port numbers
        self.log_path = os.environ.get("DPUSTACK_OSKEN_LOG")

    def _note(self, line):
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write("%.3f %s\n" % (time.time(), line))

    def _add_flow(self, dp, priority, match, actions):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        dp.send_msg(parser.OFPFlowMod(datapath=dp, priority=priority, match=match,
                                      instructions=inst))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        dp = ev.msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        miss = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
        self._add_flow(dp, 0, parser.OFPMatch(), miss)
        dp.send_msg(parser.OFPPortDescStatsRequest(dp, 0))
        self._note("connected dpid=%016x" % dp.id)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def on_port_desc(self, ev):
        dp = ev.msg.datapath
        ports = {p.port_no for p in ev.msg.body if p.port_no < dp.ofproto.OFPP_MAX}
        self.ports[dp.id] = ports
        self._note("ports dpid=%016x %s" % (dp.id, sorted(ports)))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        in_port = msg.match["in_port"]
        eth = packet.Packet(msg.data).get_protocol(ethernet.ethernet)
        if eth is None:
            return
        self._note("packet_in dpid=%016x in_port=%d %s->%s" % (dp.id, in_port, eth.src, eth.dst))
        table = self.macs.setdefault(dp.id, {})
        table[eth.src] = in_port
        out = table.get(eth.dst)
        if out is not None and out != in_port:
            match = parser.OFPMatch(in_port=in_port, eth_src=eth.src, eth_dst=eth.dst)
            self._add_flow(dp, 1, match, [parser.OFPActionOutput(out)])
            actions = [parser.OFPActionOutput(out)]
        elif out == in_port:
            return
        else:
            others = sorted(self.ports.get(dp.id, set()) - {in_port})
            actions = [parser.OFPActionOutput(p) for p in others]
        data = msg.data if msg.buffer_id == ofp.OFP_NO_BUFFER else None
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=msg.buffer_id,
                                        in_port=in_port, actions=actions, data=data))
