"""Anthropic server-tool replies, from a third-party recording.

The blocks below are pydantic-ai's recording ``tests/models/cassettes/test_anthropic/
test_anthropic_text_parts_ahead_of_built_in_tool_call.yaml`` (a live ``web_search_20250305`` call,
recorded 2026-09-29): its ``server_tool_use`` block, its ``web_search_tool_result`` (the first two of
its ten results, each with its ``encrypted_content`` and ``page_age`` as served, and the result's
``caller``), its text block with the ``web_search_result_location`` citation, and its usage
(``server_tool_use.web_search_requests: 1``). That recording was streamed; here the blocks are
assembled into the non-streaming body shape of Anthropic's Messages API (the same blocks, whole).
The ``tool_use`` of a function tool after them is ours (the recording had none).
"""

from __future__ import annotations

from typing import Any

SEARCH_ID = "srvtoolu_01EREVuMySuBsh5iTcXHFJ6H"

SERVER_TOOL_USE: dict[str, Any] = {
    "type": "server_tool_use",
    "id": SEARCH_ID,
    "name": "web_search",
    "input": {"query": "September 29 history events"},
}

SEARCH_RESULT: dict[str, Any] = {
    "type": "web_search_tool_result",
    "tool_use_id": SEARCH_ID,
    "content": [
        {
            "type": "web_search_result",
            "title": "On This Day in History",
            "url": "https://www.timeanddate.com/on-this-day/september/29",
            "encrypted_content": (
                "EosMCioIFBgCIiQ0NGFlNjc2Yy05NThmLTRkNjgtOTEwOC1lYWU5ZGU3YjM2NmISDCBZSKEltm2WUaEdFhoMQ+UWI463rAkB"
                "Jz5TIjDo7uvvOIX0a7rktwPkFaJrOUB7j+F+uFxDyGuqhA653S4YH+ApQeqOxHMNQJNLjH4qjguExNC5IMTKenXm50FH95Ja"
                "r/DyE0TqagPZ9T+KxVWkxmDAMpew8YPqla9SAFnbts/7svCsOQFE3ijrPi3zz8pxx6uuEmIEI4SIM+rKYY/XNdi4KUiqB+o/"
                "cVTgAfdxc/M6sDJpvCSmEearnJEvN0YYErtpOkz0Fo9/tpH9j4hAOmQtwF5NTLQdQh20xsCiwMLFou/r+IKIzNDCkeQkLh5V"
                "Q6AgiKPFOCiTRApYm8TYaVN9Baj5uAJzFEDI5Z1LB6vV+24cZuWCQXXKzz0f6dQEnfZizs9TVJyGyQU4ED8ep5jdy2jSKY+x"
                "kcNWdvinsKAu8hPNXopjyiWs19+vv3GfRp9ih3KATkjXg7HiJJsIahJEMpkC5zWcJd3YMGLcaWFy5nG2P3qtoObwuoyIS7ox"
                "Ge6m9yAbSnTpaWiRUNSiagqLmXBF6KcytTmyyTQrTqwzGvG0HJsSeX/P9OCbgm1gq6TyOWyQ7rRjA/zvWyNjWE4EHpP4H2vD"
                "eybp3loi59sG2/gbCIQXjj+/Lqt46IuvExfiKyS77S2fgw6khwCH0oyXcYgKhEHLJo0DgLkSZCFarh3m/aj9NIHSiXqs0l2V"
                "1AhSCFxb0OU/Aqc1Hm2JP50JKao/DSpWvzMMA+P9Vo6R9O2HHTPIoz2SEayL1xfbLZaax2jKSaD7YKGER68lOAqpIoz2U5QI"
                "ribTkfJOJCV2kiZlLFeWQlAdYIuCs9elGXsqrZY1u+MMCO/TWJYsM6cubu7TuA/u7jP2k77I46LCEmo3r7uncOzS9kHSZA6Q"
                "B7hoKvrHitpoJ9tOZAeuFk3I3T+wFnZHyMGMeZ6JaYl8exOwCKBwdO+WG9f9gYpWh3VXXdq2OOuAETgpeLIfxI1LjDJObmpe"
                "4U7Noq01Xb3FQDAsU25VnHN7/FegnIueqmFKhjrv4jJtc4VJkPEabAa6r+savCGyGtQxguQE6UA/AJCDjqW22bT/U1oNjoUN"
                "+j9WVzYjup11D4mQAwla/x5ee8VpLWNZ7ECh945fqqYXAtIZdU54/C8IFEH4y9mChHd5fYpKyczW64EpZD3s435oz9bMFz01"
                "6c8ZJ48PpPOxfmSm9YGsjp19yqPuPHNUhYHyla/VN4bs6EqFCRr3EGZmZraHfktw24uxaLEpkFGfx0XLTmYTsj+tixn/Zz3g"
                "j7P4WGlTm5KKs6ONTEOyi5bzSpKgSGScQfKVafl3am8rj0LuAX49UEadI41arITEHDzQDyVVZBAt3xYHxkEkWKiODtjiHtOb"
                "e7frdOgqpEgVJ5vo/ObMjSUdrveo5TEki9NqTPGO0siqL1hoBYHqRihNbhafSOFU1aovUcQAc5H2oblXzE1NfcbI840ykGcY"
                "5ID2HBMHlO5KojnxgJOpDNbRDUA22+9d7hSFObwV/FXsdC5Rl7jDeovpI/4UFJjBdG3Pa5PtxzxyuRB5TGjJabc9bX21EM2g"
                "ROHxW+K4ToTlDVUyTrMsn4B5BecqjABA479+oRanzr8v/KlY+h+zF5CMIFRaaNW4hqybChYmvEcE5WhIawRzIJUOythswgfZ"
                "GjfqQ4mxyYMLNriZZMV/SbrTB+1lAsRUJZAUzD/jPRXGnw6fSXTdxsM7aKS+wUsCa2KT83+3eNWTSNDnyGsxaTLebOAAXHEz"
                "PeVcIxaQD2EXSMEllqKkACMNMnBwmpp3SwtW+LDNpiuLDRaR0rYh6PjS77hgyoeFFbCZUDkX70LgWtBKVgv27Uh9B+Eg5ek7"
                "6K0nC1dBVOH6or1sGfy+AkwNXxwRasW72u6svWJuHKcpPm8vZBemu39BEq2iBxuDnQQ+j6Rt8yETS3aoaFNiLpTEYvTGJBMK"
                "pkSsNtrxPRu2zdETYFQy5kT06ypi0b5x/nL432GhqXHG05OwngQYAw=="
            ),
            "page_age": "1461 days ago",
        },
        {
            "type": "web_search_result",
            "title": "Today in History - September 29",
            "url": "https://www.loc.gov/item/today-in-history/september-29/",
            "encrypted_content": (
                "EpwFCioIFBgCIiQ0NGFlNjc2Yy05NThmLTRkNjgtOTEwOC1lYWU5ZGU3YjM2NmISDAGfxnk3d3vS3LM2KRoMZIOGN42c7MXy"
                "y3JBIjBymKKMcw0h23MwI0KrYiFF+zKjP1/R4XiASnXrnJsq8JooET8lH2KRjezjcZaMOBYqnwRCfpkkbtfFkIYEilrvwT8k"
                "v3O8sQZgZiX1CROZQKpU8WlP/fz03/RjvgszWL/6izqcJ6T9xMP7VP8vbaJes2/pdLreP7zqnN/0drcrv5LzcXbB016uSnc+"
                "v664FYYiYOkpvchFGjYXk1a4yIdKCdxSjJVKTKwba+ocnzw9iGannRkgMIOSk0Efl3hM8vjes/18cxRcKvY0141aee/kdB/9"
                "KhXPKQppnsPBXmi/x8VEUaHqojtHTaHiIHuNmmiDlHaa1UrIW5L03d7BNJWzu/ayMUA4y0B/2cuPoIMyu6pM04zvarnv1Xfv"
                "6mg5A/MTH4DAbs6z6Uci+sBcAN/QFiPlwmeUn4MsWMUkRP2vtfIGjnJgnCH4uWk6UIMreRI2LFykOJryLZOdjYOBhloDDPeS"
                "WC84mN7Qh65fXpUIo14fTBScTslN5bo6trpKjVst4dbPi1nnjJxQatwalNPfcEaCnACl8QGTDKHFdfpkcg7mG3u0uzuPJYXO"
                "TA/fYxs+E/xGoytw9a79Nej9ln4i2lBOIveBfa9aMTNbd4HZXjO1fRHI0+9gIK1TAfEvFxSBhLu7Xnt7HHcM5iP8t58LMDth"
                "ypsKWHjROxgTQb+4g71AkVVO+BzQgp3lqfQPYM4Q97xzaZXEURfM4OYCoBAflhgOsw6FPRDI1355FW8gj9whr0s45nupkySh"
                "g94rev3F5GauoPDnTWPkoiyXMlhzCXAYAw=="
            ),
            "page_age": "2922 days ago",
        },
    ],
    "caller": {"type": "direct"},
}

CITATION: dict[str, Any] = {
    "type": "web_search_result_location",
    "cited_text": (
        "1954 – CERN established\n\nThe European Organization for Nuclear Research, popularly known as CERN, "
        "was established by 12 European governments.\n\n"
    ),
    "url": "https://www.timeanddate.com/on-this-day/september/29",
    "title": "On This Day in History",
    "encrypted_index": (
        "Eo8BCioIFBgCIiQ0NGFlNjc2Yy05NThmLTRkNjgtOTEwOC1lYWU5ZGU3YjM2NmISDF1GuU2pMyhdZysNYhoMORLJBDbtMCHO"
        "5Ic7IjC2pk08F5XcLUBUtlOSwdKkT6xfAvnyRoXgMxot5ri+0Si9Oi954P18t7H7K6ihiPAqE7jNx+XXOD256+FME4StYaZW"
        "mYIYBA=="
    ),
}

CITED_TEXT: dict[str, Any] = {
    "citations": [CITATION],
    "type": "text",
    "text": "On September 29, 1954, CERN (the European Organization for Nuclear Research) was established by 12 "
    "European governments.",
}

USAGE: dict[str, Any] = {
    "input_tokens": 10195,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "output_tokens": 106,
    "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0},
}

SEARCH_ERROR: dict[str, Any] = {  # Anthropic's documented error shape (web search tool docs)
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01Cd8zMpxR1XbqGk9wFEiZtQ",
    "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
}


# pydantic-ai's ``tests/models/cassettes/test_anthropic/test_anthropic_code_execution_tool.yaml``: two
# non-streamed ``code_execution_20250825`` replies with thinking on, as recorded (content, usage).
CODE_REPLY_1: dict[str, Any] = {
    "container": {"expires_at": "2025-09-17T00:24:43.124581Z", "id": "container_011CTCwceSoRxi8Pf16Fb7Tn"},
    "content": [
        {
            "signature": (
                "EvsDCkYIBxgCKkCSFDXODoOrOHU14Yv7+TNxuR4sDsJKw9y9C1gGPIWqslF6apNZ1xwJ94E9KsQBfXlZ/ELoBSTj3YT0liwueN6k"
                "EgxrakXTN1a+YafcnckaDC2EYhQsezxdE/P7XSIwczAl/PquNGpiOLqC5DnYKvD2+F0JhBQsbLe1bQi/VR0XCQdd+4DZ5dBU5Amu"
                "DcntKuICIMg145F3vP8bFnTdUMOIQY0NASypKRnHj6owIkuqWJ+pwu6OdpDt2a+Lr7R1dw860hcPjEp65eg5nwtyi8bw1pzfQJmC"
                "48DoiQn/OYeiXMWeNv5HoKEK/lkikqVPcTnD03MytUsNGRqUBfDvr4bxNgxqeAENi5pZ21ySnjxhC879gN0G3uriEM8o4LXj/X2D"
                "otKO1lvIEL/2RQZGrFulDLq5I2FW51YBY3kzHerK7zwFgs3t39VLsy7Q3T6sLi4yh4BbFxF4RaSOCicTRbMYC8UO85uhArSSm/0E"
                "DDhX+kxIGJZ91F6Vv0vSS4qLy+55buZ8Jj4/P86t9YMxBeylQ/tUNGzhISqc1+CZeQ4aZKiRyQmlfkA6bcM42JAFQT/c0EbM2JmD"
                "siSpkM8d021E9hqrr2eIhasaOo4vG5yUz7f9aSaRc/Muy02mckNxxxS7UshBCxr8veoMa0HYnB/rBNFeGAE="
            ),
            "thinking": (
                "The user is asking for a simple multiplication: 3 * 12390. This is a mathematical calculation, and "
                "according to my guidelines, I should always use the code execution tool for math. Even though this "
                "is a relatively simple calculation that could be done mentally, the instruction is clear that I "
                "should use the code execution tool for math."
            ),
            "type": "thinking",
        },
        {
            "id": "srvtoolu_01Pc4vcD1JPUDcVhHaskFUfn",
            "input": {"code": 'result = 3 * 12390\nprint(f"3 * 12390 = {result}")'},
            "name": "code_execution",
            "type": "server_tool_use",
        },
        {
            "content": {
                "content": [],
                "return_code": 0,
                "stderr": "",
                "stdout": "3 * 12390 = 37170\n",
                "type": "code_execution_result",
            },
            "tool_use_id": "srvtoolu_01Pc4vcD1JPUDcVhHaskFUfn",
            "type": "code_execution_tool_result",
        },
        {"text": "3 * 12390 = 37170", "type": "text"},
    ],
    "id": "msg_018bVTPr9khzuds31rFDuqW4",
    "model": "claude-sonnet-4-20250514",
    "role": "assistant",
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "type": "message",
    "usage": {
        "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "input_tokens": 1771,
        "output_tokens": 171,
        "server_tool_use": {"web_fetch_requests": 0, "web_search_requests": 0},
        "service_tier": "standard",
    },
}
