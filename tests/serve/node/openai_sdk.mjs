// The official openai SDK against foliko: node openai_sdk.mjs SCENARIO [ARGS...]
import OpenAI from "openai";
import { zodResponseFormat, zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";

import { apiKey, baseURL, loggingFetch, main } from "./foliko.mjs";

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, fetch: loggingFetch });

const CITY = z.object({ city: z.string(), population: z.number().int() });

const ADD = {
  type: "function",
  function: {
    name: "add",
    description: "Add two numbers.",
    parameters: {
      type: "object",
      properties: { a: { type: "number" }, b: { type: "number" } },
      required: ["a", "b"],
    },
  },
};

// The SDK adds output_text to what responses.create returns, not to streamed responses.
const textOf = (output) =>
  output
    .filter((item) => item.type === "message")
    .flatMap((item) => item.content)
    .filter((part) => part.type === "output_text")
    .map((part) => part.text)
    .join("");

function brief(response) {
  return {
    id: response.id,
    object: response.object,
    status: response.status,
    output_text: response.output_text ?? textOf(response.output),
    output: response.output,
    conversation: response.conversation ?? null,
    previous_response_id: response.previous_response_id ?? null,
    usage: response.usage,
  };
}

await main({
  async "responses-plain"(text) {
    return brief(await client.responses.create({ model: "echo", input: text }));
  },

  async "responses-stream"(text) {
    const stream = await client.responses.create({ model: "echo", input: text, stream: true });
    const events = [];
    let deltas = "";
    let final = null;
    for await (const event of stream) {
      events.push({ type: event.type, sequence_number: event.sequence_number });
      if (event.type === "response.output_text.delta") deltas += event.delta;
      if (event.type === "response.completed") final = event.response;
    }
    return { events, deltas, final: final && brief(final) };
  },

  async "responses-conversation"(...texts) {
    const conversation = await client.conversations.create({ metadata: { from: "node" } });
    const replies = [];
    for (const text of texts) {
      const reply = await client.responses.create({
        model: "echo",
        input: text,
        conversation: conversation.id,
      });
      replies.push(brief(reply));
    }
    const items = [];
    for await (const item of client.conversations.items.list(conversation.id, { order: "asc" })) {
      items.push(item);
    }
    return { conversation: conversation.id, replies, items };
  },

  async "chat-plain"(system, text) {
    const completion = await client.chat.completions.create({
      model: "echo",
      messages: [
        { role: "system", content: system },
        { role: "user", content: text },
      ],
    });
    return completion;
  },

  async "chat-session"(session, ...texts) {
    const completions = [];
    for (const text of texts) {
      const completion = await client.chat.completions.create(
        { model: "echo", messages: [{ role: "user", content: text }] },
        { headers: { "X-Session-Id": session } },
      );
      completions.push(completion);
    }
    return { completions };
  },

  async "chat-stream"(text) {
    const stream = await client.chat.completions.create({
      model: "echo",
      messages: [{ role: "user", content: text }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const content = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
    return { chunks, content };
  },

  async "chat-tools"(a, b) {
    const messages = [{ role: "user", content: `/tool add ${JSON.stringify({ a: +a, b: +b })}` }];
    const first = await client.chat.completions.create({ model: "echo", messages, tools: [ADD] });
    const message = first.choices[0].message;
    messages.push(message);
    for (const call of message.tool_calls ?? []) {
      const args = JSON.parse(call.function.arguments);
      messages.push({ role: "tool", tool_call_id: call.id, content: String(args.a + args.b) });
    }
    const second = await client.chat.completions.create({ model: "echo", messages, tools: [ADD] });
    return { first, second };
  },

  // The SDK's helpers on top of the same endpoints.
  async helpers(text) {
    const stream = client.responses.stream({ model: "echo", input: text });
    const deltas = [];
    stream.on("response.output_text.delta", (event) => deltas.push(event.delta));
    const streamed = await stream.finalResponse();

    const first = await client.responses.create({ model: "echo", input: "first" });
    const next = await client.responses.create({
      model: "echo",
      input: "next",
      previous_response_id: first.id,
    });
    const nextInput = (await client.responses.inputItems.list(next.id)).data;

    const city = { city: "Oslo", population: 709037 };
    const parsed = await client.responses.parse({
      model: "echo",
      input: JSON.stringify(city),
      text: { format: zodTextFormat(CITY, "city") },
    });
    const chatParsed = await client.chat.completions.parse({
      model: "echo",
      messages: [{ role: "user", content: JSON.stringify(city) }],
      response_format: zodResponseFormat(CITY, "city"),
    });

    const runner = client.chat.completions.runTools({
      model: "echo",
      messages: [{ role: "user", content: '/tool add {"a": 1, "b": 2}' }],
      tools: [
        {
          type: "function",
          function: { ...ADD.function, function: ({ a, b }) => String(a + b), parse: JSON.parse },
        },
      ],
    });
    const chatStream = client.chat.completions.stream({
      model: "echo",
      messages: [{ role: "user", content: text }],
    });
    return {
      stream: { text: streamed.output_text, deltas },
      previous: { id: first.id, next: brief(next), input: nextInput },
      parsed: parsed.output_parsed,
      chatParsed: chatParsed.choices[0].message.parsed,
      runTools: await runner.finalContent(),
      chatStream: (await chatStream.finalChatCompletion()).choices[0].message.content,
    };
  },
});
