"""Operations intelligence: acceptance verification, diagnosis with repair steps,
advice proven in rehearsal, health reports and the knowledge base.

It sits above the control plane and the rehearsal package (``rehearsal/``): it reads a
cluster through the plane's read models (``ControlPlane.resolve``), the health service's
alerts and the capability protocols its fabric declares (``ComputeProbe``,
``CollectiveProbe``, ``HardwareErrors``), and proves advice by rehearsing the current
state in virtual time (``twin.rehearsal``). Only the surfaces (API, CLI) import it.

Modules: ``checks`` (the check and finding values), ``verify`` (inventory, compute,
interconnect), ``drill`` (a chip failure under a probe job, rehearsed), ``diagnose``
(findings with repair steps and runbooks), ``runbooks`` (fault kind -> documented
action), ``advise`` (recommendations, each rehearsed with and without its action),
``reports`` (health reports, their charts and archive), ``kb`` (the guides in docs/kb).
"""
