"""The availability zones of each region: zone-name letters and AZ ID numbers, with their source.

botocore ships no zone list (only regions), and ``DescribeAvailabilityZones``
needs credentials, which ``mlcluster validate`` and ``cdk synth`` must not.
So this is a committed table. Source: EC2 ``DescribeAvailabilityZones`` as
moto 5.2.5 records it for every region (``moto/ec2/models/
availability_zones_and_regions.py``); ``tests/config/test_zones.py`` fails
when the table and that record part ways. Regions missing here (new ones)
are not checked. Local Zones and Wavelength Zones are not availability zones
and are not listed.

- AZ IDs (``use1-az4``) name the same physical zone in every account: an ID
  whose number is not listed is refused.
- Zone names (``us-east-1a``) are mapped to zones per account in the regions
  created before November 2012 (AWS "AZ IDs", Regions with independently
  mapped Availability Zones), so an account may see a letter another does
  not (``us-west-1c``): there, one letter past the listed ones is accepted.
  Elsewhere the letters are the listed ones.
"""

from __future__ import annotations

from typing import Final

#: EC2 DescribeAvailabilityZones per region (moto 5.2.5's record): zone-name letters and AZ ID numbers.
ZONES: Final[dict[str, tuple[str, tuple[int, ...]]]] = {
    "af-south-1": ("abc", (1, 2, 3)),
    "ap-east-1": ("abc", (1, 2, 3)),
    "ap-east-2": ("abc", (1, 2, 3)),
    "ap-northeast-1": ("acd", (1, 2, 4)),
    "ap-northeast-2": ("abcd", (1, 2, 3, 4)),
    "ap-northeast-3": ("abc", (1, 2, 3)),
    "ap-south-1": ("abc", (1, 2, 3)),
    "ap-south-2": ("abc", (1, 2, 3)),
    "ap-southeast-1": ("abc", (1, 2, 3)),
    "ap-southeast-2": ("abc", (1, 2, 3)),
    "ap-southeast-3": ("abc", (1, 2, 3)),
    "ap-southeast-4": ("abc", (1, 2, 3)),
    "ap-southeast-5": ("abc", (1, 2, 3)),
    "ap-southeast-6": ("abc", (1, 2, 3)),
    "ap-southeast-7": ("abc", (1, 2, 3)),
    "ca-central-1": ("abd", (1, 2, 4)),
    "ca-west-1": ("abc", (1, 2, 3)),
    "cn-north-1": ("ab", (1, 2)),
    "cn-northwest-1": ("abc", (1, 2, 3)),
    "eu-central-1": ("abc", (1, 2, 3)),
    "eu-central-2": ("abc", (1, 2, 3)),
    "eu-north-1": ("abc", (1, 2, 3)),
    "eu-south-1": ("abc", (1, 2, 3)),
    "eu-south-2": ("abc", (1, 2, 3)),
    "eu-west-1": ("abc", (1, 2, 3)),
    "eu-west-2": ("abc", (1, 2, 3)),
    "eu-west-3": ("abc", (1, 2, 3)),
    "il-central-1": ("abc", (1, 2, 3)),
    "me-central-1": ("abc", (1, 2, 3)),
    "me-south-1": ("abc", (1, 2, 3)),
    "mx-central-1": ("abc", (1, 2, 3)),
    "sa-east-1": ("abc", (1, 2, 3)),
    "us-east-1": ("abcdef", (1, 2, 3, 4, 5, 6)),
    "us-east-2": ("abc", (1, 2, 3)),
    "us-gov-east-1": ("abc", (1, 2, 3)),
    "us-gov-west-1": ("abc", (1, 2, 3)),
    "us-west-1": ("ab", (1, 3)),
    "us-west-2": ("abcd", (1, 2, 3, 4)),
}

#: Regions created before November 2012, whose zone letters AWS maps per account.
PER_ACCOUNT_LETTERS: Final = frozenset(
    {
        "us-east-1",
        "us-west-1",
        "us-west-2",
        "eu-west-1",
        "ap-northeast-1",
        "ap-southeast-1",
        "sa-east-1",
        "us-gov-west-1",
    }
)

SOURCE: Final = "EC2 DescribeAvailabilityZones as recorded by moto 5.2.5 (mlcluster/config/zones.py)"


def zone_letters(region: str) -> str | None:
    """The zone-name letters accepted in ``region``; ``None`` when the region is not in the table."""
    if region not in ZONES:
        return None
    letters = ZONES[region][0]
    if region in PER_ACCOUNT_LETTERS:
        last = max(letters[-1], chr(ord("a") + len(letters)))
        return "".join(chr(c) for c in range(ord("a"), ord(last) + 1))
    return letters


def zone_ids(region: str, code: str) -> list[str] | None:
    """The AZ IDs of ``region`` (its ID code is ``code``); ``None`` when the region is not in the table."""
    if region not in ZONES:
        return None
    return [f"{code}-az{n}" for n in ZONES[region][1]]
